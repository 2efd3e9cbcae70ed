/** mqtt-packet's table of MQTT 5 properties, which its package ships untyped (publish-layout.ts). */
declare module "mqtt-packet/constants.js" {
  const constants: {
    /** Property identifier → mqtt-packet's name of it. */
    propertiesCodes: Record<number, string>;
    /** Property name → the type of its value: byte, int8, int16, int32, var, string, binary, pair. */
    propertiesTypes: Record<string, string>;
  };
  export default constants;
}
